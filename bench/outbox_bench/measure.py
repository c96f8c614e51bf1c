"""What ``outbox_bench`` measures, one function per figure. Every rate is jobs per second.

The bench writes jobs of its own queue (``outbox-bench``) to the outbox database, starts its
own worker processes (which alone know its tasks), and deletes its jobs when done. Drain rates
and latencies use the database's and the system's monotonic clocks, not the bench's polling.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from django.db import connections, transaction
from django.db.models import Max, Min

from django_outbox import enqueue_many
from django_outbox.db import queries_for
from django_outbox.models import Job, JobQuerySet
from django_outbox.tasks import Task
from django_outbox.worker.supervisor import Supervisor, WorkerOptions

from . import tasks as bench_tasks
from .bare import BARE_QUEUE, BareFloor, measure_bare_floor
from .clients import Clients
from .tables import bare_row_model, created, effect_model
from .tasks import QUEUE, START_PORT_VARIABLE
from .writes import WRITE_KINDS, rate_in_this_process, using

#: The queue of the finished jobs inserted to measure a large table (never claimed).
RETAINED_QUEUE = f"{QUEUE}-retained"


def bench_jobs() -> JobQuerySet:
    return Job.objects.using(using()).filter(queue=QUEUE)


def delete_jobs_of(*queues: str) -> None:
    """Delete every job of ``queues`` in one statement.

    Not ``QuerySet.delete()``: it would first look for the project's rows that reference each
    job (a ForeignKey to Job), which no bench job has, in statements as long as the job list.
    """
    table = Job._meta.db_table
    placeholders = ", ".join(["%s"] * len(queues))
    # A new session: PostgreSQL caches the plans of its foreign-key checks per session, and a
    # plan made while the table was nearly empty scans it whole for every deleted row.
    connections[using()].close()
    with connections[using()].cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE queue IN ({placeholders})", list(queues))


def delete_bench_jobs() -> None:
    delete_jobs_of(QUEUE, RETAINED_QUEUE, BARE_QUEUE)
    vacuum()


def vacuum() -> None:
    """Clear the job table of dead rows (PostgreSQL), as autovacuum would between bursts.

    The bench runs with autovacuum off, so that it cannot start in the middle of a figure; but
    the dead index entries of every drained job would then pile up from figure to figure (three
    runs of three drains left the next drain at a sixth of its speed).
    """
    connection = connections[using()]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass
class Figure:
    """One measured figure: the median of its runs."""

    name: str
    unit: str
    runs: list[float] = field(default_factory=list)

    @property
    def value(self) -> float:
        return median(self.runs)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit, "median": self.value, "runs": self.runs}


# Enqueue rates.


def measure_enqueue(count: int, clients: int) -> dict[str, float]:
    """Return writes/s of each of WRITE_KINDS, one per transaction, from ``clients`` processes.

    With one client, in this process. The kinds run in alternating blocks, so that all see the
    same machine; each figure is the median of its blocks.
    """
    rates: dict[str, list[float]] = {kind: [] for kind in WRITE_KINDS}
    with contextlib.ExitStack() as stack:
        stack.enter_context(created(bare_row_model(), using()))
        pool = stack.enter_context(Clients(clients)) if clients > 1 else None
        for _ in range(3):
            for kind in WRITE_KINDS:
                if pool is None:
                    rates[kind].append(rate_in_this_process(kind, count // 3))
                else:
                    rates[kind].append(pool.rate(kind, count // 3))
    delete_bench_jobs()
    return {kind: median(values) for kind, values in rates.items()}


def measure_bulk_enqueue(count: int, batch: int) -> float:
    """Return jobs/s enqueued with enqueue_many, ``batch`` jobs per transaction."""
    db = using()
    payloads = [{"n": number} for number in range(batch)]
    batches = max(1, count // batch)
    started = time.perf_counter()
    for _ in range(batches):
        with transaction.atomic(using=db):
            enqueue_many(bench_tasks.noop, payloads)
    rate = batches * batch / (time.perf_counter() - started)
    delete_bench_jobs()
    return rate


# Workers.


@dataclass
class Workers:
    """The bench's worker processes, running in the background."""

    supervisor: Supervisor
    thread: threading.Thread

    def cpu_seconds(self) -> float:
        """CPU seconds (user and system) the worker processes have used so far (Linux)."""
        return _cpu_seconds(self.supervisor.pids)

    def peak_rss_mb(self) -> list[float]:
        """Each worker process's peak resident memory so far (Linux), in MB."""
        peaks = []
        for pid in self.supervisor.pids:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        peaks.append(int(line.split()[1]) / 1024)
        return peaks


@contextlib.contextmanager
def running_workers(
    processes: int,
    concurrency: int,
    prefetch: int | Literal["auto"],
    environ: dict[str, str] | None = None,
) -> Iterator[Workers]:
    """Start worker processes for the bench's queue; wait until they run jobs; stop them."""
    options = WorkerOptions(
        queues=[QUEUE],
        concurrency=concurrency,
        prefetch=prefetch,
        shutdown_timeout=10,
        quiet=True,
        environ=environ or {},
    )
    supervisor = Supervisor(options, processes)
    thread = threading.Thread(target=supervisor.run, name="outbox-bench-supervisor", daemon=True)
    thread.start()
    workers = Workers(supervisor, thread)
    try:
        # Each process must be up (it has imported Django and connected) before timing starts.
        drain(processes * max(concurrency, 10), bench_tasks.noop, timeout=120)
        yield workers
    finally:
        supervisor.request_stop()
        thread.join(60)
        delete_bench_jobs()


def enqueue_in_one_transaction(
    count: int, task: Task, fair_keys: int = 0, *, interleaved: bool = False
) -> None:
    """Enqueue ``count`` jobs of ``task``; with ``fair_keys``, spread over that many fair keys:
    each key's jobs after the previous key's (the order an unfair queue would serve, a bulk
    load per key), or with ``interleaved`` one job of each key in turn (many keys' traffic
    arriving together)."""
    with transaction.atomic(using=using()):
        if fair_keys and interleaved:
            for number in range(count):
                enqueue_many(task, [{"n": number}], fair_key=f"tenant-{number % fair_keys}")
            return
        if fair_keys:
            per_key = -(-count // fair_keys)
            for key, start in enumerate(range(0, count, per_key)):
                payloads = [{"n": n} for n in range(start, min(count, start + per_key))]
                enqueue_many(task, payloads, fair_key=f"tenant-{key}")
            return
        for start in range(0, count, 5000):
            enqueue_many(task, [{"n": n} for n in range(start, min(count, start + 5000))])


def fair_enqueue_cost(count: int, keys: int) -> tuple[float, float]:
    """Return jobs/s of single enqueues, one per transaction, without a fair key and with one
    (of ``keys``, in turn), in alternating blocks; the queue holds the jobs enqueued so far."""
    db = using()
    rates: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(3):
        for fair in (False, True):
            started = time.perf_counter()
            for number in range(count // 3):
                with transaction.atomic(using=db):
                    bench_tasks.noop.enqueue(
                        {"n": number}, fair_key=f"tenant-{number % keys}" if fair else None
                    )
            rates[fair].append((count // 3) / (time.perf_counter() - started))
    # The workers run these jobs as they come: deleting a running job's row would have its
    # worker report a lost lease.
    wait_until_finished(time.monotonic() + 600)
    delete_jobs_of(QUEUE)
    return median(rates[False]), median(rates[True])


def wait_until_finished(deadline: float) -> None:
    """Wait until every bench job has finished (the workers' queue is idle)."""
    jobs = bench_jobs()
    while jobs.unfinished().exists():
        if time.monotonic() > deadline:
            raise TimeoutError("The bench's jobs did not finish in time; are workers up?")
        time.sleep(0.02)


def newcomer_wait(backlog: int, *, fair: bool, timeout: float = 600) -> tuple[int, float]:
    """Enqueue ``backlog`` 5 ms jobs under one key (``fair``) or none; once workers run them,
    enqueue one job for a new key. Return how many backlog jobs workers claimed after the
    newcomer was enqueued and before it, and its wait from enqueue to start in ms."""
    jobs = bench_jobs()
    delete_jobs_of(QUEUE)
    with transaction.atomic(using=using()):
        payloads = [{"n": n} for n in range(backlog)]
        enqueue_many(bench_tasks.paced, payloads, fair_key="big" if fair else None)
    deadline = time.monotonic() + timeout
    while not jobs.filter(started_at__isnull=False).exists():
        if time.monotonic() > deadline:
            raise TimeoutError("The backlog did not start; are workers up?")
        time.sleep(0.005)
    newcomer = bench_tasks.paced.enqueue({"n": "new"}, fair_key="new" if fair else None)
    wait_until_finished(deadline)
    newcomer.refresh_from_db()
    assert newcomer.started_at is not None
    if jobs.filter(finished_at__lt=newcomer.enqueued_at).count() > backlog // 2:
        raise RuntimeError("Half the backlog had finished before the newcomer came: no test.")
    ahead = jobs.filter(
        started_at__gt=newcomer.enqueued_at, started_at__lt=newcomer.started_at
    ).count()
    waited = (newcomer.started_at - newcomer.enqueued_at).total_seconds() * 1000
    delete_jobs_of(QUEUE)
    return ahead, waited


def drain(
    count: int,
    task: Task,
    *,
    fair_keys: int = 0,
    interleaved: bool = False,
    timeout: float = 600,
) -> float:
    """Enqueue ``count`` jobs at once and return jobs/s from the first claim to the last finish
    (``fair_keys`` and ``interleaved`` as ``enqueue_in_one_transaction`` takes them).

    The times are the database's (started_at, finished_at), so the bench's own polling for the
    end does not blur them.
    """
    return drain_measured(
        count, task, fair_keys=fair_keys, interleaved=interleaved, timeout=timeout
    ).per_s


@dataclass(frozen=True)
class Drained:
    """A drain's rate, and the whole machine's CPU while it ran (None where no /proc/stat):
    the cores' busy seconds, every process's (workers, database, bench), and idle ones."""

    per_s: float
    machine_busy_seconds: float | None
    machine_idle_seconds: float | None


def drain_measured(
    count: int,
    task: Task,
    *,
    fair_keys: int = 0,
    interleaved: bool = False,
    timeout: float = 600,
) -> Drained:
    """``drain``, with the machine's CPU from the enqueue's commit to the last job's end."""
    jobs = bench_jobs()
    delete_jobs_of(QUEUE)
    # Before the first drain too: with autovacuum off, the first drain of a run inherited the
    # dead rows of whatever ran before it (or a table never analyzed), and ran at an eighth of
    # the next one's rate (3,118 against 25,969 jobs/s on a quiet machine).
    vacuum()
    enqueue_in_one_transaction(count, task, fair_keys, interleaved=interleaved)
    before = machine_cpu_seconds()
    wait_until_finished(time.monotonic() + timeout)
    after = machine_cpu_seconds()
    span = jobs.aggregate(first=Min("started_at"), last=Max("finished_at"))
    failed = jobs.failed().count()
    if failed:
        raise RuntimeError(f"{failed} bench jobs failed; see the workers' log.")
    delete_jobs_of(QUEUE)
    vacuum()
    if task is bench_tasks.write_atomic:
        written = effect_model()._default_manager.using(using()).count()
        effect_model()._default_manager.using(using()).all().delete()
        if written != count:
            raise RuntimeError(f"{count} atomic jobs succeeded but {written} wrote their row.")
    seconds: float = (span["last"] - span["first"]).total_seconds()
    busy = idle = None
    if before is not None and after is not None:
        busy, idle = after[0] - before[0], after[1] - before[1]
    return Drained(count / max(seconds, 1e-6), busy, idle)


def machine_cpu_seconds() -> tuple[float, float] | None:
    """Seconds all cores have been busy, and idle, since boot (Linux's /proc/stat)."""
    try:
        with open("/proc/stat") as stat:
            line = stat.readline()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal ...
    ticks = [int(value) for value in line.split()[1:9]]
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK"), idle / os.sysconf("SC_CLK_TCK")


def drain_with_cpu(workers: Workers, count: int, task: Task) -> tuple[Drained, float]:
    """``drain_measured``, and the worker processes' CPU microseconds per job meanwhile."""
    before = workers.cpu_seconds()
    drained = drain_measured(count, task)
    return drained, (workers.cpu_seconds() - before) / count * 1e6


def bare_floors(count: int, processes: int, threads: int) -> tuple[BareFloor, BareFloor]:
    """The bare-Django floor of ``count`` atomic jobs (bare.py), and the handler's INSERT alone,
    on job rows of a queue no worker serves."""
    db = using()
    floors = []
    for with_update in (True, False):
        with transaction.atomic(using=db):
            ids = list(
                enqueue_many(
                    bench_tasks.noop, [{"n": n} for n in range(count)], queue=BARE_QUEUE
                ).ids
            )
        floors.append(measure_bare_floor(ids, processes, threads, with_update=with_update))
        effect_model()._default_manager.using(db).all().delete()
        delete_jobs_of(BARE_QUEUE)
    vacuum()
    return floors[0], floors[1]


@dataclass
class Latencies:
    """Enqueue-to-handler-start times in ms, one pair a job, timed from either side of COMMIT."""

    #: From the COMMIT's return, as a caller sees its enqueue committed: the figure. On a loaded
    #: machine the handler can start before the enqueueing process is scheduled again to read the
    #: clock, and a time falls below zero.
    after_commit: list[float] = field(default_factory=list)
    #: From the COMMIT sent: never below zero, and above the first by the commit's round trip
    #: (its WAL flush included), so an upper bound of the wait.
    from_commit_sent: list[float] = field(default_factory=list)


def measure_latency(samples: int, concurrency: int, pause: float = 0.02) -> Latencies:
    """Time ``samples`` jobs from their enqueue's commit to their handler's start.

    One idle worker process runs them. The handler reports its start over UDP; both ends read the
    system-wide monotonic clock.
    """
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(10)
    port = receiver.getsockname()[1]
    latencies = Latencies()
    try:
        with running_workers(1, concurrency, 0, {START_PORT_VARIABLE: str(port)}):
            for number in range(samples + 5):
                with transaction.atomic():
                    bench_tasks.mark_start.enqueue({"n": number})
                    committing = time.monotonic()  # COMMIT goes out as the block ends
                committed = time.monotonic()
                message, _ = receiver.recvfrom(256)
                reported, started = message.decode().split()
                if int(reported) != number:
                    raise RuntimeError(f"job {reported} reported while waiting for {number}")
                if number >= 5:  # The first few warm the worker's connections up.
                    latencies.after_commit.append((float(started) - committed) * 1000)
                    latencies.from_commit_sent.append((float(started) - committing) * 1000)
                time.sleep(pause)
    finally:
        receiver.close()
    return latencies


def _cpu_seconds(pids: list[int]) -> float:
    """The CPU time (user and system) the processes ``pids`` used so far (Linux)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as stat:
            # After the command's closing parenthesis: state, then fields 4 to 52; utime and
            # stime are the 14th and 15th.
            fields = stat.read().rpartition(")")[2].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def measure_idle(seconds: float, concurrency: int) -> dict[str, float]:
    """What an idle worker costs: its process's CPU time per second of polling an empty
    queue (``cpu_ms_per_s``), and one poll's statements as the worker sends them, timed here
    (``poll_ms``: the claim and the look for waiting fair jobs, median of 200)."""
    with running_workers(1, concurrency, 0) as workers:
        pids = list(workers.supervisor.pids)
        time.sleep(1.0)
        before, started = _cpu_seconds(pids), time.monotonic()
        time.sleep(seconds)
        used, elapsed = _cpu_seconds(pids) - before, time.monotonic() - started
    connection = connections[using()]
    queries = queries_for(connection)
    polls = []
    for _ in range(200):
        begun = time.perf_counter()
        queries.claim(connection, "bench-idle", [QUEUE], 10, 60.0)
        queries.waiting_kinds(connection, [QUEUE])
        polls.append((time.perf_counter() - begun) * 1000)
    return {"cpu_ms_per_s": used * 1000 / elapsed, "poll_ms": statistics.median(polls)}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


# A large table of finished jobs.


def insert_finished_jobs(count: int, *, spread_seconds: float = 0.0) -> None:
    """Insert ``count`` succeeded jobs directly, in SQL (fast).

    With ``spread_seconds``, they finished evenly over the last ``spread_seconds`` (every
    20th after two attempts, every 50th failed), each having run 0 to 2 s; else all just now.
    """
    table = Job._meta.db_table
    connection = connections[using()]
    step = spread_seconds / count
    if connection.vendor == "postgresql":
        series = "SELECT g AS n FROM generate_series(1, %s) AS g"
        finished = f"now() - n * interval '{step} seconds'"
        started = f"{finished} - (n %% 2000) * interval '1 millisecond'"
    elif connection.vendor == "mysql":
        # MariaDB's sequence table; the count is in its name, the parameter a no-op.
        series = f"SELECT seq AS n FROM seq_1_to_{int(count)} WHERE %s > 0"
        finished = f"UTC_TIMESTAMP(6) - INTERVAL ROUND(n * {step} * 1000000) MICROSECOND"
        started = f"{finished} - INTERVAL (n %% 2000) * 1000 MICROSECOND"
    else:
        series = (
            "WITH RECURSIVE series(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM series "
            "WHERE n < %s) SELECT n FROM series"
        )
        finished = f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', -(n * {step}) || ' seconds')"
        started = (
            f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', -(n * {step} + (n %% 2000) / 1000.0) "
            "|| ' seconds')"
        )
    status = "CASE WHEN n %% 50 = 0 THEN 'failed' ELSE 'succeeded' END"
    attempts = "CASE WHEN n %% 20 = 0 THEN 2 ELSE 1 END"
    if not spread_seconds:
        status, attempts, started = "'succeeded'", "1", finished
    sql = f"""
        INSERT INTO {table} (task_name, queue, payload, status, priority, run_at, attempts,
            max_attempts, worker_id, enqueued_at, started_at, finished_at, last_error,
            last_traceback, errors)
        SELECT 'outbox_bench.noop', '{RETAINED_QUEUE}', '{{}}', {status}, 0, {finished},
            {attempts}, 2, 'bench', {finished}, {started}, {finished}, '', '', '[]'
        FROM ({series}) AS numbers
    """
    with transaction.atomic(using=using()), connection.cursor() as cursor:
        cursor.execute(sql, [count])
    with connection.cursor() as cursor:
        cursor.execute(
            {"postgresql": f"VACUUM ANALYZE {table}", "mysql": f"ANALYZE TABLE {table}"}.get(
                connection.vendor, "ANALYZE"
            )
        )


def time_stats(*, exact: bool = False) -> dict[str, float]:
    """Seconds each of django_outbox.stats' functions takes (the median of 3 calls)."""
    from django_outbox.stats import figures as stats

    calls: dict[str, Callable[[], object]] = {
        "queue_stats": lambda: stats.queue_stats(exact=exact),
        "processing_time_stats": lambda: stats.processing_time_stats(age=3600, exact=exact),
        "retry_stats": lambda: stats.retry_stats(age=86400, exact=exact),
    }
    timings = {}
    for name, call in calls.items():
        runs = []
        for _ in range(3):
            started = time.perf_counter()
            call()
            runs.append(time.perf_counter() - started)
        timings[name] = median(runs)
    return timings
