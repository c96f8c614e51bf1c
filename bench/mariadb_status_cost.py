"""What a MariaDB claim and completion cost: the UPDATE statements' times and the server's CPU a
job, on one database or several, alternated.

One thread claims 100 jobs at a time and marks them succeeded (``claim()`` then
``mark_many_succeeded()``, as a worker does without running anything), over ``--jobs`` no-op
jobs, and times each statement by the client; the server's CPU comes from ``/proc`` (the
``mariadbd`` process on this host, so the server should otherwise be idle). Run from
``example_project/`` against databases already migrated (the script migrates none, so that two
databases at different migrations can be compared by the same code)::

    DEBUG=false PYTHONPATH=../bench DJANGO_SETTINGS_MODULE=outbox_bench.settings \
        DATABASE_URL=mysql://root@127.0.0.1:3306/outbox_a \
        ../.venv/bin/python ../bench/mariadb_status_cost.py [--jobs 5000]

One database a run (``DATABASE_URL``): alternate runs on the databases compared, in a loop of
the shell. Prints one line of figures, with the load average at the start.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: The statements timed: a name, and how its SQL starts (after whitespace).
TIMED = (
    ("claim_update_ms", "UPDATE django_outbox_job\nSET max_attempts"),
    ("completion_update_ms", "UPDATE django_outbox_job \nSET status = 'succeeded'"),
    ("selects_ms", "SELECT"),
    ("commit_ms", "COMMIT"),
)
BATCH = 100


def setup() -> None:
    # The example project (the current directory) and the bench app.
    sys.path[:0] = [os.getcwd(), str(Path(__file__).resolve().parent)]
    import django

    django.setup()


def server_cpu_seconds() -> float:
    """The MariaDB server's CPU time so far (it runs on this host)."""
    pid = subprocess.run(["pidof", "mariadbd"], capture_output=True, text=True).stdout.split()[0]
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def timed_statements(connection: Any, times: dict[str, list[float]]) -> Iterator[None]:
    """Add each statement's time in ms to ``times``, under its name in TIMED."""

    def wrapper(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            for name, start in TIMED:
                if sql.strip().startswith(start.strip()):
                    times[name].append(elapsed)
                    break

    with connection.execute_wrapper(wrapper):
        yield


def measure(jobs: int) -> dict[str, float]:
    """Enqueue ``jobs`` no-op jobs, claim and complete them 100 at a time; the figures."""
    from django.db import connections, transaction
    from outbox_bench import tasks as bench_tasks
    from outbox_bench.tasks import QUEUE
    from outbox_bench.writes import using

    from django_outbox import enqueue_many
    from django_outbox.db import queries_for
    from django_outbox.models import Job

    connection = connections[using()]
    table = Job._meta.db_table
    with transaction.atomic(using=using()):
        for start in range(0, jobs, 5000):
            enqueue_many(
                bench_tasks.noop, [{"n": n} for n in range(start, min(jobs, start + 5000))]
            )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE TABLE {table}")
        cursor.fetchall()
    queries = queries_for(connection)
    times: dict[str, list[float]] = defaultdict(list)
    cpu_before = server_cpu_seconds()
    started = time.perf_counter()
    done = 0
    with timed_statements(connection, times):
        while claimed := queries.claim(connection, "cost-bench", [QUEUE], BATCH, 300):
            done += len(queries.mark_many_succeeded(connection, claimed))
    seconds = time.perf_counter() - started
    cpu = server_cpu_seconds() - cpu_before
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE queue = %s", [QUEUE])
    figures = {name: statistics.median(values) for name, values in times.items()}
    figures["server_cpu_us_per_job"] = cpu / max(done, 1) * 1e6
    figures["jobs_per_s"] = done / seconds
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=5000)
    arguments = parser.parse_args()
    setup()
    load = os.getloadavg()[0]
    figures = measure(arguments.jobs)
    text = " ".join(f"{name}={value:.1f}" for name, value in sorted(figures.items()))
    print(f"load={load:.1f} {text}", flush=True)


if __name__ == "__main__":
    main()
