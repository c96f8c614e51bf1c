"""Time the job changelist's search at 1,000,000 jobs, one of them with a 20 MB payload.

Run from the repository's top, with PostgreSQL on 127.0.0.1:5432 (user postgres)::

    .venv/bin/python bench/admin_search.py [--rows 1000000] [--keep]

It creates the database ``outbox_admin_bench`` (dropping an older one), migrates it, loads the
jobs with one INSERT ... SELECT generate_series, then requests the changelist through Django's
test client as a superuser, as a browser would, and prints the time of each request. It drops
the database at the end unless --keep. docs/performance.md ("The search") records a run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from scratch import (
    arguments_parser,
    machine,
    ms,
    repeat,
    scratch_postgresql,
    server_version,
    set_up_django,
    superuser_client,
)

DATABASE = "outbox_admin_bench"
RUNS = 5

# Finished jobs over the last 30 days: 2% failed with an error message, the rest succeeded.
LOAD_JOBS = """
INSERT INTO django_outbox_job (
    task_name, queue, payload, status, priority, run_at, attempts, max_attempts, worker_id,
    enqueued_at, started_at, finished_at, last_error, last_traceback, errors
)
SELECT
    'bench.tasks.task_' || (g %% 20),
    'queue_' || (g %% 5),
    jsonb_build_object('n', g, 'note', 'an ordinary payload of a few dozen bytes'),
    CASE WHEN g %% 50 = 0 THEN 'failed' ELSE 'succeeded' END,
    0,
    at,
    1,
    CASE WHEN g %% 50 = 0 THEN 1 ELSE 20 END,
    'host-' || (g %% 4) || ':' || (1000 + g %% 16) || ':abc123',
    at,
    at,
    at + interval '50 milliseconds',
    CASE WHEN g %% 50 = 0 THEN 'RuntimeError: failure ' || g || ' calling the API' ELSE '' END,
    CASE WHEN g %% 50 = 0 THEN repeat('Traceback line ', 40) ELSE '' END,
    '[]'::jsonb
FROM generate_series(1, %s) AS g,
    LATERAL (SELECT now() - (g * interval '2 seconds')) AS t(at)
"""
# The newest job, on the changelist's first page: a 20 MB payload of hex digits (random, so that
# TOAST compression cannot shrink it to nothing the way it would a repeated character).
LOAD_BIG_JOB = """
INSERT INTO django_outbox_job (
    task_name, queue, payload, status, priority, run_at, attempts, max_attempts, worker_id,
    enqueued_at, started_at, finished_at, last_error, last_traceback, errors
)
VALUES (
    'bench.tasks.import_file',
    'queue_0',
    jsonb_build_object(
        'blob',
        (SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 20 * 1024 * 1024 / 32))
    ),
    'failed', 0, now(), 1, 1, 'host-0:1000:abc123', now(), now(), now(),
    'ValueError: the file is too large', '', '[]'::jsonb
)
RETURNING id
"""


def timed(client: Any, params: dict[str, str]) -> tuple[list[float], int, int]:
    """Return the seconds of RUNS requests (after one warm-up), their status and rows listed."""
    from django.urls import reverse

    url = reverse("admin:django_outbox_job_changelist")
    seconds, responses = repeat(lambda: client.get(url, params), RUNS)
    response = responses[-1]
    listed = response.context["cl"].result_count if response.status_code == 200 else -1
    return seconds, response.status_code, listed


def main() -> None:
    arguments = arguments_parser(__doc__.splitlines()[0]).parse_args()
    with scratch_postgresql(DATABASE, keep=arguments.keep):
        run(arguments.rows)


def run(rows: int) -> None:
    set_up_django()
    import django
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(LOAD_JOBS, [rows])
        cursor.execute(LOAD_BIG_JOB)
        big_id = cursor.fetchone()[0]
        cursor.execute("VACUUM ANALYZE django_outbox_job")
        cursor.execute("SELECT pg_size_pretty(pg_total_relation_size('django_outbox_job'))")
        size = cursor.fetchone()[0]
    loaded = time.perf_counter() - started
    version = server_version(connection)
    print(f"Loaded {rows:,} jobs and one with a 20 MB payload in {loaded:.0f} s.")
    print(f"Table with indexes and TOAST: {size}. {version}; Django {django.get_version()}.")
    print(machine())

    client = superuser_client()
    # (name, search now, the same search with Django's plain search, or None to leave it out).
    cases = [
        ("list, no search", {}, {}),
        (
            f"default search, a task ({rows // 20:,} matches)",
            {"q": "task_7"},
            {"q": "task_7"},
        ),
        ("default search, no match", {"q": "nothing-matches-this"}, {"q": "nothing-matches-this"}),
        ("default search, a worker prefix", {"q": "host-3:1015"}, {"q": "host-3:1015"}),
        ("id search, the 20 MB job", {"q": str(big_id)}, {"q": str(big_id)}),
        ("id search, an old job", {"q": "12345"}, {"q": "12345"}),
        (
            "error search (error:failure 123450)",
            {"q": "error:failure 123450"},
            {"q": "failure 123450"},
        ),
        (
            "error search, status filter failed",
            {"q": "error:failure 123450", "status__exact": "failed"},
            {"q": "failure 123450", "status__exact": "failed"},
        ),
        # Django's plain search took 438 s for this, with a larger table; not run again.
        ("10,000-character search (refused)", {"q": "x" * 10_000}, None),
    ]
    results = {}
    for name, params, _ in cases:
        results[name] = timed(client, params)
    with django_plain_search():
        before = {name: timed(client, params) for name, _, params in cases if params is not None}

    print()
    print(
        f"{'changelist request':<40} {'median ms':>9} {'max ms':>7} {'rows':>9}   "
        f"{'before: median ms':>17} {'rows':>9}"
    )
    for name, _, _ in cases:
        seconds, status, listed = results[name]
        line = f"{name:<40} {ms(statistics.median(seconds)):>9} {ms(max(seconds)):>7} "
        line += f"{listed:>9,}" if status == 200 else f"{'HTTP ' + str(status):>9}"
        if name in before:
            seconds, status, listed = before[name]
            line += f"   {ms(statistics.median(seconds)):>17} {listed:>9,}"
        print(line)


@contextmanager
def django_plain_search() -> Iterator[None]:
    """Give the job admin Django's plain search, as it had before its own, for comparison.

    Django's own search (icontains on task, queue, last_error and worker), no time limit, and a
    list that fetches every column.
    """
    from django.contrib import admin

    from django_outbox.admin.job_admin import JobAdmin

    saved = {
        name: JobAdmin.__dict__[name]
        for name in ("search_fields", "get_search_results", "changelist_view", "get_changelist")
    }
    JobAdmin.search_fields = ("task_name", "queue", "last_error", "worker_id")
    for name in ("get_search_results", "changelist_view", "get_changelist"):
        setattr(JobAdmin, name, getattr(admin.ModelAdmin, name))
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(JobAdmin, name, value)


if __name__ == "__main__":
    main()
