"""Time the admin's dashboard beside 1,000,000 finished jobs.

Run from the repository's top, with PostgreSQL on 127.0.0.1:5432 (user postgres)::

    .venv/bin/python bench/dashboard.py [--rows 1000000] [--keep]

It creates the database ``outbox_dashboard_bench`` (dropping an older one), migrates it, and
times the dashboard page (requested through Django's test client as a superuser, as a browser
would) and ``django_outbox.stats.overview.dashboard()`` alone, in two cases: the finished jobs
spread over 30 days (a long retention: about 1/30 of them in the day's chart), and all of them
within the last day (the default retention of succeeded jobs, a busy queue). Both with a backlog of
10,000 waiting jobs, 40 running, 100 halted, across 5 queues, 20 registered workers, and two
days of activity counts (a row per queue and minute).
docs/performance.md ("The dashboard") records a run.
"""

from __future__ import annotations

import statistics

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

DATABASE = "outbox_dashboard_bench"
RUNS = 15

# Finished jobs, the newest now, one every %s seconds back: 2% failed, 1% cancelled.
LOAD_FINISHED = """
INSERT INTO django_outbox_job (
    task_name, queue, payload, status, priority, run_at, attempts, max_attempts, worker_id,
    enqueued_at, started_at, finished_at, last_error, last_traceback, errors
)
SELECT
    'bench.tasks.task_' || (g %% 20),
    'queue_' || (g %% 5),
    jsonb_build_object('n', g),
    CASE WHEN g %% 50 = 0 THEN 'failed' WHEN g %% 100 = 1 THEN 'cancelled' ELSE 'succeeded' END,
    0, at, 1, 20, 'host-' || (g %% 4) || ':1000:abc123', at, at,
    at + interval '50 milliseconds',
    CASE WHEN g %% 50 = 0 THEN 'RuntimeError: failure ' || g ELSE '' END,
    '', '[]'::jsonb
FROM generate_series(1, %s) AS g,
    LATERAL (SELECT now() - (g * %s * interval '1 second')) AS t(at)
"""
# The backlog: ready jobs due over the last 10 minutes, running and halted ones.
LOAD_BACKLOG = """
INSERT INTO django_outbox_job (
    task_name, queue, status, priority, run_at, attempts, max_attempts, worker_id,
    lease_token, lease_expires_at, last_error, last_traceback, errors
)
SELECT 'bench.tasks.task_1', 'queue_' || (g % 5), status, 0,
    now() - (g % 600) * interval '1 second', attempts, 20, '',
    CASE WHEN status = 'running' THEN gen_random_uuid() END,
    CASE WHEN status = 'running' THEN now() + interval '60 seconds' END,
    '', '', '[]'::jsonb
FROM generate_series(1, 10140) AS g,
    LATERAL (SELECT CASE WHEN g <= 40 THEN 'running' WHEN g <= 140 THEN 'halted'
                         ELSE 'ready' END,
                    CASE WHEN g <= 140 THEN 1 ELSE 0 END) AS s(status, attempts)
"""
# What workers counted: every minute of the last two days, per queue.
LOAD_ACTIVITY = """
INSERT INTO django_outbox_queueactivity (minute, queue, succeeded, retried, failed)
SELECT date_trunc('minute', now()) - m * interval '1 minute', 'queue_' || q,
    50 + (m % 30), m % 3, CASE WHEN m % 17 = 0 THEN 1 ELSE 0 END
FROM generate_series(0, 2 * 1440 - 1) AS m, generate_series(0, 4) AS q
"""
LOAD_WORKERS = """
INSERT INTO django_outbox_workerprocess (
    worker_id, instance, host, pid, queues, concurrency, started_at, last_heartbeat_at,
    heartbeat_seconds, jobs_done, jobs_failed, last_error
)
SELECT 'host-' || g || ':' || (1000 + g), gen_random_uuid(), 'host-' || g, 1000 + g, '[]',
    8, now() - interval '2 hours', now(), 10, 10000 * g, g, ''
FROM generate_series(1, 20) AS g
"""


def main() -> None:
    arguments = arguments_parser(__doc__.splitlines()[0]).parse_args()
    with scratch_postgresql(DATABASE, keep=arguments.keep):
        run(arguments.rows)


def run(rows: int) -> None:
    set_up_django()
    import django
    from django.db import connection
    from django.urls import reverse

    from django_outbox.stats.overview import dashboard

    client = superuser_client()
    url = reverse("admin:django_outbox_dashboard_changelist")
    print(f"{server_version(connection)}; Django {django.get_version()}; {machine()}")
    print()
    print(
        f"{'case':<46} {'in last day':>11} {'page ms: median':>15} {'min':>5} {'max':>5} "
        f"{'figures ms: median':>18} {'min':>5}"
    )
    for name, spacing in (
        (f"{rows:,} finished over 30 days", 30 * 86400 / rows),
        (f"{rows:,} finished within the last day", 86000 / rows),
    ):
        with connection.cursor() as cursor:
            cursor.execute(
                "TRUNCATE django_outbox_job, django_outbox_jobdependency, "
                "django_outbox_workerprocess, django_outbox_queueactivity"
            )
            cursor.execute(LOAD_FINISHED, [rows, spacing])
            cursor.execute(LOAD_BACKLOG)
            cursor.execute(LOAD_WORKERS)
            cursor.execute(LOAD_ACTIVITY)
            cursor.execute("VACUUM ANALYZE django_outbox_queueactivity")
            cursor.execute("VACUUM ANALYZE django_outbox_job")
            cursor.execute(
                "SELECT count(*) FROM django_outbox_job "
                "WHERE finished_at >= now() - interval '1 day'"
            )
            in_day = cursor.fetchone()[0]

        def page() -> None:
            response = client.get(url)
            assert response.status_code == 200, response.status_code

        pages, _ = repeat(page, RUNS)
        figures, _ = repeat(dashboard, RUNS)
        print(
            f"{name:<46} {in_day:>11,} {ms(statistics.median(pages)):>15} {ms(min(pages)):>5} "
            f"{ms(max(pages)):>5} {ms(statistics.median(figures)):>18} {ms(min(figures)):>5}"
        )


if __name__ == "__main__":
    main()
