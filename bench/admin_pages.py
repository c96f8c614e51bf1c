"""Time the job admin's pages at 1,000,000 retained jobs.

Run from the repository's top, with PostgreSQL on 127.0.0.1:5432 (user postgres)::

    .venv/bin/python bench/admin_pages.py [--rows 1000000] [--keep] [--reuse] [--explain]
    .venv/bin/python bench/admin_pages.py --sqlite .bench/admin.sqlite3 [...]

It creates the database ``outbox_admin_pages`` (dropping an older one unless --reuse finds it
loaded; with --sqlite, that file), migrates it and loads the jobs with one INSERT ... SELECT
(generate_series, or a recursive query on SQLite): nearly all succeeded, 2% failed with a
traceback and an error history, some cancelled, a backlog of ready jobs, a few running and halted
ones, and three old jobs in a queue and of a task of their own (the filters that find least).
Task names and queues are the ones the admin's filters offer. It then requests each page through
Django's test client as a superuser, as a browser would, and prints the median and slowest of
RUNS requests after one warm-up, rendering included. --explain prints the plan of each list
query; --rows must be at least 2,100 (MIN_ROWS). docs/performance.md
("The job list") records a run.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from scratch import (
    arguments_parser,
    machine,
    ms,
    repeat,
    scratch_postgresql,
    scratch_sqlite,
    server_version,
    set_up_django,
    superuser_client,
)

DATABASE = "outbox_admin_pages"
RUNS = 7
RARE_QUEUE = "rare"
# Their task, of no other job (a task renamed, or one that rarely runs): the task filter that
# finds least.
RARE_TASK = "bench.rare_task"
# The admin's indexes of migrations 0021 (a queue's list, the search of errors) and 0022 (a
# task's list), which the script measures with and without.
NEW_INDEXES = ("outbox_job_queue", "outbox_job_error_trigrams", "outbox_job_task")
# The newest 2,013 jobs are the backlog and the running and halted ones; the pages need failed
# jobs older than them (every 50th), so a few more.
MIN_ROWS = 2_100

# %(tasks)s and %(queues)s: SQL arrays of the names the filters offer. g counts from the
# oldest job; the newest are the backlog and the running and halted jobs.
LOAD_JOBS = """
INSERT INTO django_outbox_job (
    task_name, queue, payload, status, priority, run_at, attempts, max_attempts, worker_id,
    enqueued_at, started_at, finished_at, last_error, last_traceback, errors, lease_token,
    lease_expires_at, halt_reason
)
SELECT
    tasks[1 + g %% cardinality(tasks)],
    queues[1 + g %% cardinality(queues)],
    jsonb_build_object('order', g, 'note', 'an ordinary payload of a few dozen bytes'),
    status,
    0,
    at,
    CASE WHEN status IN ('ready') THEN 0 WHEN status = 'failed' THEN 3 ELSE 1 END,
    3,
    CASE WHEN status = 'ready' THEN '' ELSE 'host-' || (g %% 4) || ':' || (1000 + g %% 16) END,
    at,
    CASE WHEN status = 'ready' THEN NULL ELSE at END,
    CASE WHEN status IN ('succeeded', 'failed', 'cancelled') THEN at + interval '50 ms' END,
    CASE WHEN status = 'failed' THEN 'KeyError: ''customer'' (order ' || g || ')' ELSE '' END,
    CASE WHEN status = 'failed' THEN repeat('Traceback line ', 40) ELSE '' END,
    CASE WHEN status = 'failed' THEN jsonb_build_array(
        jsonb_build_object('attempt', 1, 'at', at, 'worker', 'host-1:1001', 'error', 'KeyError'),
        jsonb_build_object('attempt', 2, 'at', at, 'worker', 'host-2:1002', 'error', 'KeyError'),
        jsonb_build_object('attempt', 3, 'at', at, 'worker', 'host-3:1003', 'error', 'KeyError'))
    ELSE '[]'::jsonb END,
    CASE WHEN status = 'running' THEN gen_random_uuid() END,
    CASE WHEN status = 'running' THEN now() + interval '1 hour' END,
    CASE WHEN status = 'halted' THEN 'waiting for approval' ELSE '' END
FROM generate_series(1, %(rows)s) AS g,
    LATERAL (SELECT now() - ((%(rows)s - g) * interval '2 seconds')) AS t(at),
    LATERAL (SELECT CASE
        WHEN g > %(rows)s - 8 THEN 'running'
        WHEN g > %(rows)s - 13 THEN 'halted'
        WHEN g > %(rows)s - 2013 THEN 'ready'
        WHEN g %% 50 = 0 THEN 'failed'
        WHEN g %% 200 = 1 THEN 'cancelled'
        ELSE 'succeeded' END) AS s(status),
    LATERAL (SELECT %(tasks)s::text[], %(queues)s::text[]) AS n(tasks, queues)
"""
LOAD_RARE = """
INSERT INTO django_outbox_job (task_name, queue, payload, status, priority, max_attempts,
    attempts, worker_id, enqueued_at, run_at, started_at, finished_at, last_error,
    last_traceback, errors)
SELECT %s, %s, '{}'::jsonb, 'succeeded', 0, 1, 1, 'host-0:1000', at, at, at, at, '', '', '[]'
FROM generate_series(1, 3) AS g, LATERAL (SELECT now() - g * interval '300 days') AS t(at)
"""


# The same jobs on SQLite; {rows} and {tasks}/{queues} (how many names) are integers put in by
# the script, the two ? the names as JSON arrays. Datetimes as Django writes them on SQLite.
LOAD_JOBS_SQLITE = """
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {rows}),
s(n, status, at) AS (
    SELECT n,
        CASE
            WHEN n > {rows} - 8 THEN 'running'
            WHEN n > {rows} - 13 THEN 'halted'
            WHEN n > {rows} - 2013 THEN 'ready'
            WHEN n %% 50 = 0 THEN 'failed'
            WHEN n %% 200 = 1 THEN 'cancelled'
            ELSE 'succeeded' END,
        strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-' || (({rows} - n) * 2) || ' seconds')
    FROM g
)
INSERT INTO django_outbox_job (
    task_name, queue, payload, status, priority, run_at, attempts, max_attempts, worker_id,
    enqueued_at, started_at, finished_at, last_error, last_traceback, errors, lease_token,
    lease_expires_at, halt_reason
)
SELECT
    json_extract(?, '$[' || (n %% {tasks}) || ']'),
    json_extract(?, '$[' || (n %% {queues}) || ']'),
    json_object('order', n, 'note', 'an ordinary payload of a few dozen bytes'),
    status,
    0,
    at,
    CASE WHEN status = 'ready' THEN 0 WHEN status = 'failed' THEN 3 ELSE 1 END,
    3,
    CASE WHEN status = 'ready' THEN '' ELSE 'host-' || (n %% 4) || ':' || (1000 + n %% 16) END,
    at,
    CASE WHEN status = 'ready' THEN NULL ELSE at END,
    CASE WHEN status IN ('succeeded', 'failed', 'cancelled')
        THEN strftime('%%Y-%%m-%%d %%H:%%M:%%f', at, '+0.05 seconds') END,
    CASE WHEN status = 'failed' THEN 'KeyError: ''customer'' (order ' || n || ')' ELSE '' END,
    CASE WHEN status = 'failed' THEN printf('%%.600c', 'T') ELSE '' END,
    CASE WHEN status = 'failed' THEN json_array(
        json_object('attempt', 1, 'at', at, 'worker', 'host-1:1001', 'error', 'KeyError'),
        json_object('attempt', 2, 'at', at, 'worker', 'host-2:1002', 'error', 'KeyError'),
        json_object('attempt', 3, 'at', at, 'worker', 'host-3:1003', 'error', 'KeyError'))
    ELSE '[]' END,
    CASE WHEN status = 'running' THEN lower(hex(randomblob(16))) END,
    CASE WHEN status = 'running' THEN strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+1 hour') END,
    CASE WHEN status = 'halted' THEN 'waiting for approval' ELSE '' END
FROM s
"""
LOAD_RARE_SQLITE = """
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 3),
t(at) AS (SELECT strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-' || (n * 300) || ' days') FROM g)
INSERT INTO django_outbox_job (task_name, queue, payload, status, priority, max_attempts,
    attempts, worker_id, enqueued_at, run_at, started_at, finished_at, last_error,
    last_traceback, errors)
SELECT ?, ?, '{}', 'succeeded', 0, 1, 1, 'host-0:1000', at, at, at, at, '', '', '[]' FROM t
"""


class QueryTimer:
    """Adds up the time of the queries run on a connection (connection.execute_wrapper)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - started


def timed(
    client: Any, url: str, params: dict[str, str]
) -> tuple[list[float], list[float], int, str]:
    """Return the seconds of RUNS requests (after one warm-up) and of their queries, the status
    and the count shown."""
    from django.db import connection

    def request() -> tuple[Any, float]:
        timer = QueryTimer()
        with connection.execute_wrapper(timer):
            response = client.get(url, params)
        return response, timer.seconds

    seconds, results = repeat(request, RUNS)
    response = results[-1][0]
    in_queries = [in_query for _, in_query in results]
    shown = ""
    if response.status_code == 200 and response.context and "cl" in response.context:
        cl = response.context["cl"]
        shown = str(cl.result_count)
        if getattr(cl, "by_key", False):
            shown += ", by key" + (", next" if cl.next_page_query else ", last page")
    return seconds, in_queries, response.status_code, shown


def main() -> None:
    parser = arguments_parser(__doc__.splitlines()[0])
    parser.add_argument("--reuse", action="store_true", help="Use the database a --keep left.")
    parser.add_argument("--explain", action="store_true", help="Print each list query's plan.")
    parser.add_argument("--sqlite", type=Path, help="Measure SQLite, in this file, instead.")
    parser.add_argument(
        "--database",
        default=DATABASE,
        help=f"The PostgreSQL database to create and load ({DATABASE}): one of your own where "
        "others measure on the same server.",
    )
    arguments = parser.parse_args()
    if arguments.rows < MIN_ROWS:
        parser.error(
            f"--rows must be at least {MIN_ROWS:,}: the newest 2,013 jobs are the backlog, and "
            "the pages need failed jobs older than those."
        )

    scratch: AbstractContextManager[bool] = (
        scratch_sqlite(arguments.sqlite, keep=arguments.keep, reuse=arguments.reuse)
        if arguments.sqlite
        else scratch_postgresql(arguments.database, keep=arguments.keep, reuse=arguments.reuse)
    )
    with scratch as created:
        run_pages(arguments.rows, load_rows=created, explain=arguments.explain)


def load(rows: int) -> None:
    from django.db import connection

    from django_outbox.admin.filters import queue_choices, task_choices

    tasks = task_choices()
    queues = queue_choices()
    started = time.perf_counter()
    with connection.cursor() as cursor:
        # The rare queue's jobs first: the oldest ids, the far end of the list's order.
        if connection.vendor == "sqlite":
            cursor.execute(LOAD_RARE_SQLITE, [RARE_TASK, RARE_QUEUE])
            sql = LOAD_JOBS_SQLITE.format(rows=int(rows), tasks=len(tasks), queues=len(queues))
            cursor.execute(sql, [json.dumps(tasks), json.dumps(queues)])
            cursor.execute("ANALYZE")
        else:
            cursor.execute(LOAD_RARE, [RARE_TASK, RARE_QUEUE])
            cursor.execute(LOAD_JOBS, {"rows": rows, "tasks": tasks, "queues": queues})
            cursor.execute("VACUUM ANALYZE django_outbox_job")
    print(f"Loaded {rows:,} jobs in {time.perf_counter() - started:.0f} s.")


def run_pages(rows: int, load_rows: bool, explain: bool) -> None:
    set_up_django()
    import django
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    from django_outbox.models import Job
    from django_outbox.tasks.registry import registered_names

    if load_rows:
        load(rows)
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
            )
            size = f"{cursor.fetchone()[0] / 2**20:.0f} MB (the whole file)"
        else:
            cursor.execute("SELECT pg_size_pretty(pg_total_relation_size('django_outbox_job'))")
            size = cursor.fetchone()[0]
        cursor.execute("SELECT status, count(*) FROM django_outbox_job GROUP BY 1 ORDER BY 2 DESC")
        statuses = ", ".join(f"{status} {count:,}" for status, count in cursor.fetchall())
    print(f"Jobs: {statuses}. Table with indexes and TOAST: {size}.")
    print(f"{server_version(connection)}; Django {django.get_version()}; {machine()}")

    client = superuser_client()
    changelist = reverse("admin:django_outbox_job_changelist")
    failed = Job.objects.filter(status="failed").order_by("-id").values_list("pk", flat=True)[0]
    oldest = Job.objects.order_by("id").values_list("pk", flat=True)[0]
    # The newest failed job of an outbox task, its task and queue: filters that find some. (The
    # loader gives some jobs a Django task's path as their task name, which the task filter
    # reads as a Django task: jobs of the outbox's own tasks with that path in their payload.)
    task, queue = (
        Job.objects.filter(status="failed", task_name__in=registered_names())
        .order_by("-id")
        .values_list("task_name", "queue")[0]
    )
    # Pages by key deep in the lists: after the job in the middle of the table, and after the
    # failed job that failed in the middle of the failed ones.
    middle = Job.objects.order_by("id").values_list("pk", flat=True)[Job.objects.count() // 2]
    failures = Job.objects.filter(status="failed").order_by("finished_at", "id")
    middle_failed = failures.values_list("pk", "finished_at")[failures.count() // 2]
    failed_at = middle_failed[1]
    assert failed_at is not None, "a failed job has its failure time"
    failed_cursor = f"{middle_failed[0]}_{failed_at.isoformat()}"
    cases: list[tuple[str, str, dict[str, str]]] = [
        ("list, no filter", changelist, {}),
        ("list, next page by key, mid-table", changelist, {"after": str(middle)}),
        ("list, page 200 (counted pages)", changelist, {"p": "200"}),
        ("status failed (by failure time)", changelist, {"status__exact": "failed"}),
        ("status ready", changelist, {"status__exact": "ready"}),
        ("status running", changelist, {"status__exact": "running"}),
        ("status halted", changelist, {"status__exact": "halted"}),
        (f"queue {queue}", changelist, {"queue": queue}),
        (f"task {task.rsplit('.', 1)[-1]}", changelist, {"task_name": task}),
        ("queue with 3 jobs", changelist, {"queue": RARE_QUEUE}),
        ("task with 3 jobs", changelist, {"task_name": RARE_TASK}),
        ("status failed and a task", changelist, {"status__exact": "failed", "task_name": task}),
        ("status failed and a queue", changelist, {"status__exact": "failed", "queue": queue}),
        ("search by id (the oldest job)", changelist, {"q": str(oldest)}),
        (
            "failed, next page by key, mid-way",
            changelist,
            {"status__exact": "failed", "after": failed_cursor},
        ),
        (
            "failed, by failure time, oldest first",
            changelist,
            {"status__exact": "failed", "o": "7"},
        ),
        ("search a task, with its count", changelist, {"q": task.rsplit(".", 1)[-1]}),
        (
            "search failed errors, with count",
            changelist,
            {"status__exact": "failed", "q": "error:customer"},
        ),
        ("search errors, no match", changelist, {"q": "error:no such error"}),
        # One failed job's error (the job in the middle of the table, when --rows is even).
        ("search errors, one match", changelist, {"q": f"error:(order {rows // 2 // 50 * 50})"}),
        ("due jobs (dashboard link)", changelist, {"waiting": "due"}),
        ("dashboard", reverse("admin:django_outbox_dashboard_changelist"), {}),
        ("dashboard's live refresh", reverse("admin:django_outbox_dashboard_live"), {}),
        (
            "a failed job's page",
            reverse("admin:django_outbox_job_change", args=[failed]),
            {},
        ),
        (
            "its edit-payload page",
            reverse("admin:django_outbox_job_edit_payload", args=[failed]),
            {},
        ),
    ]
    print()
    print(f"{'page':<36} {'median ms':>9} {'max ms':>7} {'queries ms':>10}   count shown")
    for name, url, params in cases:
        seconds, in_queries, status, shown = timed(client, url, params)
        line = f"{name:<36} {ms(statistics.median(seconds)):>9} {ms(max(seconds)):>7} "
        line += f"{ms(statistics.median(in_queries)):>10}   "
        print(line + (shown if status == 200 else f"HTTP {status}"))
        if explain and url == changelist:
            with CaptureQueriesContext(connection) as captured:
                client.get(url, params)
            for query in captured.captured_queries:
                if "django_outbox_job" in query["sql"] and not query["sql"].startswith("EXPLAIN"):
                    print_plan(connection, query["sql"])
    print()
    print("A/B: the lists the indexes of migrations 0021 and 0022 serve, with them and without")
    print("them (dropped in a transaction that is rolled back), in turns:")
    print(f"{'page':<36} {'with':>9} {'without':>9}   ms, medians; queries ms with / without")
    by_name = {name: (url, params) for name, url, params in cases}
    for name in (
        "list, no filter",
        f"queue {queue}",
        "queue with 3 jobs",
        f"task {task.rsplit('.', 1)[-1]}",
        "task with 3 jobs",
        "search failed errors, with count",
        "search errors, no match",
        "search errors, one match",
    ):
        url, params = by_name[name]
        with_index, with_queries, _, _ = timed(client, url, params)
        with without_indexes(NEW_INDEXES):
            without, without_queries, _, _ = timed(client, url, params)
        line = f"{name:<36} {ms(statistics.median(with_index)):>9} "
        line += f"{ms(statistics.median(without)):>9}   "
        line += f"{ms(statistics.median(with_queries))} / {ms(statistics.median(without_queries))}"
        print(line)
    print()
    print("The same lists with the list of Django's defaults (the admin before its rework):")
    with admin_of_django_defaults():
        for name, url, params in cases[:1] + cases[2:4] + cases[7:9]:
            seconds, in_queries, status, _ = timed(client, url, params)
            line = f"{name:<36} {ms(statistics.median(seconds)):>9} {ms(max(seconds)):>7} "
            print(line + f"{ms(statistics.median(in_queries)):>10}   HTTP {status}")


@contextmanager
def without_indexes(names: tuple[str, ...]) -> Iterator[None]:
    """Drop the indexes ``names`` for the block, in a transaction rolled back at its end (the
    table stays locked meanwhile: a scratch database's)."""
    from django.db import connection, transaction

    with transaction.atomic():
        with connection.cursor() as cursor:
            for name in names:
                cursor.execute(f"DROP INDEX IF EXISTS {name}")
        yield
        transaction.set_rollback(True)


@contextmanager
def admin_of_django_defaults() -> Iterator[None]:
    """Give the job admin back the list of Django's defaults, for comparison: Django's
    filters for the queue and task (SELECT DISTINCT), the date hierarchy, facets allowed, the
    full count, sorting by any column, the last error read whole."""
    from django.contrib import admin
    from django.contrib.admin.views.main import ChangeList
    from django.core.paginator import Paginator

    from django_outbox.admin.job_admin import JobAdmin, JobChangeList

    saved_admin = {
        name: JobAdmin.__dict__[name]
        for name in (
            "list_filter",
            "paginator",
            "show_facets",
            "sortable_by",
            "action_checkbox",
            "get_sortable_by",
            "get_ordering",
        )
    }
    saved_list = {name: JobChangeList.__dict__[name] for name in ("get_queryset", "get_results")}
    # Class attributes set by name: their types differ from the new ones'.
    before: dict[str, Any] = {
        "list_filter": ("status", "queue", "task_name"),
        "date_hierarchy": "enqueued_at",
        "paginator": Paginator,
        "show_facets": admin.ShowFacets.ALLOW,
        "sortable_by": None,
        "action_checkbox": admin.ModelAdmin.action_checkbox,
        "get_sortable_by": admin.ModelAdmin.get_sortable_by,
        "get_ordering": admin.ModelAdmin.get_ordering,
    }
    for name, value in before.items():
        setattr(JobAdmin, name, value)

    def get_queryset(self: Any, request: Any, exclude_parameters: Any = None) -> Any:
        return (
            super(JobChangeList, self)
            .get_queryset(request, exclude_parameters)
            .defer("payload", "last_traceback", "errors", "return_value", "resume_data", "context")
        )

    JobChangeList.get_queryset = get_queryset  # type: ignore[method-assign]
    JobChangeList.get_results = ChangeList.get_results  # type: ignore[method-assign]
    try:
        yield
    finally:
        for name, value in saved_admin.items():
            setattr(JobAdmin, name, value)
        del JobAdmin.date_hierarchy
        for name, value in saved_list.items():
            setattr(JobChangeList, name, value)


def print_plan(connection: Any, sql: str) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            plan = [row[-1] for row in cursor.fetchall()]
        else:
            cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {sql}")
            plan = [row[0] for row in cursor.fetchall()]
    print(f"    {sql[:160]}")
    for line in plan:
        print(f"      {line}")


if __name__ == "__main__":
    main()
