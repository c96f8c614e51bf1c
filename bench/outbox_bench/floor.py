"""The PostgreSQL floor: what the database itself does on this machine, measured with pgbench.

A job queue on PostgreSQL cannot be faster than PostgreSQL. Its two hot paths are a committed
single-row INSERT (enqueueing a job) and an ``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP
LOCKED)`` (a worker claiming jobs). The floor is those statements run bare by pgbench, with no
Python, no Django and no ORM in the way:

* ``insert_per_s`` -- single-row INSERT commits per second (``insert1``);
* ``claim1_per_s`` -- transactions per second that each claim one row with SKIP LOCKED
  (``claim1``);
* ``claim100_rows_per_s`` -- rows per second claimed 100 per statement (``claim100``, tps x 100);
* ``atomic_job_per_s`` -- transactions per second that do what an atomic job that writes one row
  sends, its claim aside (a hundredth of a claim of 100 per job): ``BEGIN``, the handler's
  single-row INSERT, the success mark (an UPDATE of one job row by primary key), ``COMMIT``
  (``atomic_job``). No Python runs a handler here: an atomic drain that writes cannot reach it.

Absolute figures say more about the machine than about the code: a laptop on battery, a busy CI
runner and a server differ by several times, and even one machine drifts from minute to minute.
So the benchmark command measures the floor in the same run as the job-queue figures and prints
each of those as a ratio of the floor ("enqueue at 0.41 of the INSERT floor"). Ratios taken
minutes apart on one machine are comparable across machines and across runs; raw numbers are not.

The SQL is exactly the one used for the performance targets (PostgreSQL 15, fsync on, 2 cores,
pgbench beside the server): ``pgbench -i -s 10`` for ``pgbench_history``, a table ``q`` shaped like
the job table with its partial "ready" index, and three runs of ``pgbench -n -c 4 -j 2 -T 10``.
``q`` is refilled before each claim run since claiming consumes it, and a run that emptied the
queue is detected rather than reported: once the queue is dry, claims find nothing and finish
quickly, which would inflate the figure.

Everything happens in a scratch database that is dropped at the end.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

__all__ = ["Floor", "FloorError", "FloorUnavailable", "measure_floor"]

# libpq settings accepted in ``conninfo``, and the environment variables that carry them.
_ENVIRONMENT = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD"}

_CREATE_Q = """\
CREATE TABLE q (id bigserial primary key, queue text not null default 'default',
  status smallint not null default 0, priority int not null default 0,
  run_at timestamptz not null default now(), payload jsonb, attempts int default 0,
  locked_by text, locked_until timestamptz, finished_at timestamptz)"""
_CREATE_Q_READY = "CREATE INDEX q_ready ON q (queue, priority DESC, run_at, id) WHERE status = 0"
_FILL_Q = "INSERT INTO q (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, %s) g"

_INSERT1 = "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1,1,1,1,now());\n"
_CLAIM1 = (
    "BEGIN;\n"
    "UPDATE q SET status = 1, locked_by = 'w', locked_until = now() + interval '5 min',"
    " attempts = attempts + 1 WHERE id = (SELECT id FROM q WHERE status = 0"
    " AND queue = 'default' AND run_at <= now() ORDER BY priority DESC, run_at, id"
    " LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, payload;\n"
    "COMMIT;\n"
)
_CLAIM100 = (
    "UPDATE q SET status = 1, locked_by = 'w', locked_until = now() + interval '5 min',"
    " attempts = attempts + 1 WHERE id IN (SELECT id FROM q WHERE status = 0"
    " AND queue = 'default' AND run_at <= now() ORDER BY priority DESC, run_at, id"
    " LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING id, payload;\n"
)
_ATOMIC_JOB = (
    "\\set id random(1, 300000)\n"
    "BEGIN;\n"
    "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1,1,1,1,now());\n"
    "UPDATE q SET status = 2, locked_until = NULL, finished_at = now() WHERE id = :id;\n"
    "COMMIT;\n"
)
_SCRIPTS = {
    "insert1": _INSERT1,
    "claim1": _CLAIM1,
    "claim100": _CLAIM100,
    "atomic_job": _ATOMIC_JOB,
}

# Rows in ``q`` before a claim run: 300,000 as in the reference setup, more for long runs so the
# queue cannot run dry (the reference machine claims ~3,700 rows/s one by one and ~93,000 rows/s
# 100 at a time, so these leave a margin of about 8x and 1.6x there).
_BASE_ROWS = 300_000
_ROWS_PER_SECOND = {"claim1": 30_000, "claim100": 150_000}

_TPS_LINE = re.compile(r"^tps = (\d+(?:\.\d*)?) \(([^)]*)\)", re.MULTILINE)
_DATABASE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_RESERVED_DATABASES = frozenset({"postgres", "template0", "template1"})


class FloorUnavailable(Exception):
    """The floor cannot be measured here: no pgbench, no server, or no right to create databases."""


class FloorError(Exception):
    """Measuring the floor went wrong: pgbench failed, or a claim run emptied the queue."""


@dataclass(frozen=True)
class Floor:
    """The PostgreSQL floor: medians over ``runs``, and each run's figures."""

    insert_per_s: float  # median single-row INSERT commits/s
    claim1_per_s: float  # median single-claim transactions/s
    claim100_rows_per_s: float  # median rows/s claimed 100 per statement
    atomic_job_per_s: float  # median BEGIN, INSERT, UPDATE by id, COMMIT transactions/s
    runs: list[dict[str, float]]  # each run's four figures, keyed like the fields above

    def as_dict(self) -> dict[str, object]:
        return {
            "insert_per_s": self.insert_per_s,
            "claim1_per_s": self.claim1_per_s,
            "claim100_rows_per_s": self.claim100_rows_per_s,
            "atomic_job_per_s": self.atomic_job_per_s,
            "runs": [dict(run) for run in self.runs],
        }


def measure_floor(
    conninfo: dict[str, str],
    *,
    seconds: float = 10,
    clients: int = 4,
    threads: int = 2,
    runs: int = 3,
    database: str = "outbox_floor",
    log: Callable[[str], None] | None = None,
) -> Floor:
    """Measure the floor on the PostgreSQL server described by ``conninfo``.

    ``conninfo`` holds libpq settings among ``host``, ``port``, ``user`` and ``password``; a
    missing one takes libpq's default (including its ``PG*`` environment variables). The scratch
    database ``database`` is dropped first if it exists, and dropped again at the end. Each of
    ``runs`` runs is ``insert1``, ``claim1`` and ``claim100``, each for ``seconds`` seconds
    (pgbench takes whole seconds) with ``clients`` clients on ``threads`` threads.

    Raises FloorUnavailable when pgbench or psycopg is missing, the server cannot be reached or
    the user cannot create databases, and FloorError when pgbench fails or a claim run empties the
    queue even after a refill with more rows.
    """
    unknown = sorted(set(conninfo) - set(_ENVIRONMENT))
    if unknown:
        raise ValueError(f"unsupported conninfo keys {unknown}; use {sorted(_ENVIRONMENT)}")
    if seconds < 1 or seconds != int(seconds):
        raise ValueError(
            f"seconds must be a whole number of at least 1 (pgbench -T), not {seconds}"
        )
    if clients < 1 or threads < 1 or runs < 1:
        raise ValueError("clients, threads and runs must each be at least 1")
    if not _DATABASE_NAME.fullmatch(database) or database in _RESERVED_DATABASES:
        raise ValueError(f"{database!r} is not usable as a scratch database name")

    pgbench = shutil.which("pgbench")
    if pgbench is None:
        raise FloorUnavailable(
            "measuring the PostgreSQL floor needs pgbench on PATH "
            "(Debian/Ubuntu package postgresql-client)"
        )
    try:
        import psycopg
    except ImportError as exc:
        raise FloorUnavailable(
            "measuring the PostgreSQL floor needs psycopg (pip install 'django-outbox[postgres]')"
        ) from exc

    say = log if log is not None else _quiet
    bench = _Bench(
        pgbench=pgbench,
        conninfo=conninfo,
        database=database,
        duration=int(seconds),
        clients=clients,
        threads=threads,
        say=say,
    )

    say(f"floor: creating scratch database {database}")
    with _admin_connection(conninfo) as admin:
        _drop_database(admin, database)
        _create_database(admin, database, conninfo)
    finished = False
    try:
        floor = bench.measure(runs)
        finished = True
    finally:
        say(f"floor: dropping scratch database {database}")
        try:
            with _admin_connection(conninfo) as admin:
                _drop_database(admin, database)
        except (psycopg.Error, FloorUnavailable) as exc:
            # Do not hide the error that brought us here; after a success, report it.
            if finished:
                raise FloorError(f"could not drop scratch database {database}: {exc}") from exc
            say(f"floor: could not drop scratch database {database}: {exc}")
    return floor


def _quiet(line: str) -> None:
    pass


class _Bench:
    """One measurement: pgbench runs against the scratch database, and the queue between them."""

    def __init__(
        self,
        *,
        pgbench: str,
        conninfo: Mapping[str, str],
        database: str,
        duration: int,
        clients: int,
        threads: int,
        say: Callable[[str], None],
    ) -> None:
        self.pgbench = pgbench
        self.conninfo = conninfo
        self.database = database
        self.duration = duration
        self.clients = clients
        self.threads = threads
        self.say = say
        self.env = dict(os.environ)
        self.env.update({_ENVIRONMENT[key]: value for key, value in conninfo.items()})

    def measure(self, runs: int) -> Floor:
        with tempfile.TemporaryDirectory(prefix="outbox-floor-") as scripts_dir:
            scripts = {}
            for name, text in _SCRIPTS.items():
                path = Path(scripts_dir) / f"{name}.sql"
                path.write_text(text, encoding="utf-8")
                scripts[name] = str(path)

            self.say("floor: pgbench -i -s 10 (pgbench_history for insert1)")
            self._pgbench(["-i", "-s", "10", self.database], timeout=1800)
            with _connect(self.conninfo, self.database) as conn:
                conn.execute(_CREATE_Q)
                conn.execute(_CREATE_Q_READY)
                results: list[dict[str, float]] = []
                for number in range(1, runs + 1):
                    insert = self._tps(scripts["insert1"])
                    claim1 = self._claim_run(conn, "claim1", scripts["claim1"], 1)
                    claim100 = self._claim_run(conn, "claim100", scripts["claim100"], 100)
                    # After a claim run q holds at least _BASE_ROWS rows for its UPDATEs.
                    atomic_job = self._tps(scripts["atomic_job"])
                    results.append(
                        {
                            "insert_per_s": insert,
                            "claim1_per_s": claim1,
                            "claim100_rows_per_s": claim100,
                            "atomic_job_per_s": atomic_job,
                        }
                    )
                    self.say(
                        f"floor run {number}/{runs}: insert {insert:.0f}/s, "
                        f"claim1 {claim1:.0f}/s, claim100 {claim100:.0f} rows/s, "
                        f"atomic job {atomic_job:.0f}/s"
                    )

        return Floor(
            insert_per_s=statistics.median(run["insert_per_s"] for run in results),
            claim1_per_s=statistics.median(run["claim1_per_s"] for run in results),
            claim100_rows_per_s=statistics.median(run["claim100_rows_per_s"] for run in results),
            atomic_job_per_s=statistics.median(run["atomic_job_per_s"] for run in results),
            runs=results,
        )

    def _claim_run(
        self, conn: psycopg.Connection[TupleRow], name: str, script: str, per_tx: int
    ) -> float:
        """Refill ``q``, run a claim script and return rows claimed per second.

        If the queue ran dry the figure is worthless: refill with enough rows for the rate just
        seen and run again, once.
        """
        rows = max(_BASE_ROWS, math.ceil(_ROWS_PER_SECOND[name] * self.duration))
        for attempt in (1, 2):
            self._fill(conn, rows)
            rate = self._tps(script) * per_tx
            remaining = _scalar(conn, "SELECT count(*) FROM q WHERE status = 0")
            if remaining > 0:
                return rate
            message = (
                f"{name} ran the queue dry: {rows} rows claimed in {self.duration} s "
                f"(pgbench reported {rate:.0f} rows/s)"
            )
            if attempt == 2:
                raise FloorError(message)
            # A dry run's rate is inflated by empty claims, so it overestimates the rows needed.
            rows = max(rows * 2, math.ceil(rate * self.duration * 1.2))
            self.say(f"floor: {message}; again with {rows} rows")
        raise AssertionError("unreachable")

    def _fill(self, conn: psycopg.Connection[TupleRow], rows: int) -> None:
        self.say(f"floor: filling q with {rows} rows")
        conn.execute("TRUNCATE q")
        conn.execute(_FILL_Q, (rows,))
        conn.execute("VACUUM ANALYZE q")

    def _tps(self, script: str) -> float:
        self.say(f"floor: pgbench {Path(script).stem} for {self.duration} s")
        output = self._pgbench(
            [
                "-n",
                "-c",
                str(self.clients),
                "-j",
                str(self.threads),
                "-T",
                str(self.duration),
                "-f",
                script,
                self.database,
            ],
            timeout=self.duration + 300,
        )
        return _parse_tps(output)

    def _pgbench(self, arguments: list[str], *, timeout: float) -> str:
        command = [self.pgbench, *arguments]
        try:
            completed = subprocess.run(
                command, check=True, capture_output=True, text=True, env=self.env, timeout=timeout
            )
        except subprocess.CalledProcessError as exc:
            raise FloorError(
                f"{' '.join(command)} failed with exit status {exc.returncode}:\n"
                f"{(exc.stderr or '').strip() or (exc.stdout or '').strip()}"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise FloorError(f"{' '.join(command)} did not finish within {timeout:.0f} s") from exc
        return completed.stdout


def _parse_tps(output: str) -> float:
    """The tps pgbench reports, not counting connection time.

    pgbench 14 and later print one line, ``tps = 8312.123456 (without initial connection time)``;
    older ones print an "including" and an "excluding connections establishing" line.
    """
    lines = _TPS_LINE.findall(output)
    for value, note in lines:
        if note.startswith(("without", "excluding")):
            return float(value)
    if lines:
        return float(lines[0][0])
    raise FloorError(f"no tps line in pgbench's output:\n{output.strip()}")


def _scalar(conn: psycopg.Connection[TupleRow], query: str) -> int:
    row = conn.execute(query).fetchone()
    if row is None or not isinstance(row[0], int):
        raise FloorError(f"unexpected result from {query!r}: {row!r}")
    return row[0]


def _admin_connection(conninfo: Mapping[str, str]) -> psycopg.Connection[TupleRow]:
    """An autocommit connection to the ``postgres`` maintenance database."""
    import psycopg

    try:
        return _connect(conninfo, "postgres")
    except psycopg.OperationalError as exc:
        where = conninfo.get("host", "the default host") + (
            f":{conninfo['port']}" if "port" in conninfo else ""
        )
        raise FloorUnavailable(f"cannot connect to PostgreSQL at {where}: {exc}".strip()) from exc


def _connect(conninfo: Mapping[str, str], dbname: str) -> psycopg.Connection[TupleRow]:
    """An autocommit connection to ``dbname``; unset settings take libpq's defaults."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    dsn = make_conninfo("", dbname=dbname, connect_timeout=10, **conninfo)
    return psycopg.connect(dsn, autocommit=True)


def _drop_database(admin: psycopg.Connection[TupleRow], database: str) -> None:
    from psycopg import errors, sql

    # WITH (FORCE), PostgreSQL 13+, ends sessions a failed run may have left behind.
    force = sql.SQL(" WITH (FORCE)") if admin.info.server_version >= 130000 else sql.SQL("")
    try:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {}{}").format(sql.Identifier(database), force)
        )
    except errors.InsufficientPrivilege as exc:
        raise FloorUnavailable(
            f"cannot drop the existing database {database} (owned by another user?): {exc}"
        ) from exc


def _create_database(
    admin: psycopg.Connection[TupleRow], database: str, conninfo: Mapping[str, str]
) -> None:
    from psycopg import errors, sql

    try:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    except errors.InsufficientPrivilege as exc:
        user = conninfo.get("user", "the default user")
        raise FloorUnavailable(
            f"PostgreSQL user {user} cannot create databases; measuring the floor needs "
            f"CREATEDB (ALTER ROLE ... CREATEDB) for a scratch database: {exc}"
        ) from exc
